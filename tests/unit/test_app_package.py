"""The Teams app package: manifest (against the official schema), icons, zip, settings checks."""

from __future__ import annotations

import json
import re
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource
from referencing.jsonschema import DRAFT4

from bot.package import (
    ACCENT_RGB,
    APP_PACKAGE_DIR,
    ICONS,
    PUBLISHER_SETTINGS,
    TEMPLATE_PATH,
    PackageSettings,
    build_package,
    main,
    manifest_bytes,
    png_bytes,
    render_manifest,
    write_icons,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "node_modules" / "@microsoft" / "app-manifest" / "build" / "json-schemas" / "teams"
EXPECTED_COMMANDS = ["my pipeline", "summarise", "log a call", "my preferences", "help"]
SETTINGS_ENV = (
    "MicrosoftAppId",
    "BOT_DOMAIN",
    "APP_VERSION",
    "PUBLISHER_NAME",
    "WEBSITE_URL",
    "PRIVACY_URL",
    "TERMS_URL",
    "TEAMS_APP_ID",
)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings in the developer's shell must not change what these tests see."""
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)


def _settings(**overrides: str) -> PackageSettings:
    values = {
        "MicrosoftAppId": "0f1e2d3c-4b5a-4697-8877-665544332211",
        "BOT_DOMAIN": "crm-copilot.contoso.com",
        "APP_VERSION": "2.3.4",
        "PUBLISHER_NAME": "Tailspin Sales IT",
        "WEBSITE_URL": "https://tailspin-toys.com/crm-copilot",
        "PRIVACY_URL": "https://tailspin-toys.com/privacy",
        "TERMS_URL": "https://tailspin-toys.com/terms",
    }
    values.update(overrides)
    return PackageSettings(**values)  # fields are populated by their env-var aliases


def _newest_schema_dir() -> Path:
    numbered = [p for p in SCHEMAS.iterdir() if re.fullmatch(r"v\d+\.\d+", p.name)]
    assert numbered, f"no numbered Teams schema versions under {SCHEMAS}"
    return max(numbered, key=lambda p: tuple(int(part) for part in p.name[1:].split(".")))


def _schema_validator(schema_dir: Path) -> Any:
    """The official manifest schema, with sibling files resolvable by name and no network access."""
    resources = []
    for path in sorted(schema_dir.glob("*.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        # Each file names its draft in "$schema"; the Teams schemas are draft-04.
        resource = Resource.from_contents(contents, default_specification=DRAFT4)
        resources += [(path.name, resource), (path.as_uri(), resource)]

    def offline(uri: str) -> Resource[Any]:
        raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # never fetch a $ref from the network

    registry: Registry[Any] = Registry(retrieve=offline).with_resources(resources)  # type: ignore[call-arg]
    schema = json.loads((schema_dir / "MicrosoftTeams.schema.json").read_text(encoding="utf-8"))
    cls = validator_for(schema)
    return cls(schema, registry=registry, format_checker=cls.FORMAT_CHECKER)


def _read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGBA, non-interlaced PNG into rows of RGBA bytes (all five filters)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, payload = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0] == zlib.crc32(
            kind + payload
        )
        if kind == b"IHDR":
            header = payload
        elif kind == b"IDAT":
            idat += payload
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, colour_type, interlace) == (8, 6, 0), "expected 8-bit RGBA, not interlaced"
    raw, stride, bpp = zlib.decompress(idat), width * 4, 4
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = previous[x], previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def _pixels(rows: list[bytes]) -> list[tuple[int, ...]]:
    return [tuple(row[x : x + 4]) for row in rows for x in range(0, len(row), 4)]


# --- manifest ------------------------------------------------------------------------------


def test_rendered_manifest_validates_against_the_official_teams_schema():
    manifest = render_manifest(_settings())
    errors = sorted(_schema_validator(_newest_schema_dir()).iter_errors(manifest), key=str)
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


def test_manifest_with_default_settings_also_validates():
    manifest = render_manifest(PackageSettings())
    assert list(_schema_validator(_newest_schema_dir()).iter_errors(manifest)) == []


def test_template_targets_the_newest_schema_version_installed_from_npm():
    newest = _newest_schema_dir().name[1:]
    template = json.loads(TEMPLATE_PATH.read_text(encoding="utf-8"))
    assert template["manifestVersion"] == newest, "a newer Teams manifest schema is installed: upgrade"
    assert template["$schema"] == (
        f"https://developer.microsoft.com/json-schemas/teams/v{newest}/MicrosoftTeams.schema.json"
    )


def test_every_placeholder_is_filled_from_settings():
    manifest = render_manifest(_settings())
    text = json.dumps(manifest)
    assert "{{" not in text
    assert manifest["id"] == manifest["bots"][0]["botId"] == "0f1e2d3c-4b5a-4697-8877-665544332211"
    assert manifest["version"] == "2.3.4"
    assert manifest["developer"] == {
        "name": "Tailspin Sales IT",
        "websiteUrl": "https://tailspin-toys.com/crm-copilot",
        "privacyUrl": "https://tailspin-toys.com/privacy",
        "termsOfUseUrl": "https://tailspin-toys.com/terms",
    }


def test_teams_app_id_overrides_the_manifest_id_but_not_the_bot_id():
    manifest = render_manifest(_settings(TEAMS_APP_ID="aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"))
    assert manifest["id"] == "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
    assert manifest["bots"][0]["botId"] == manifest["webApplicationInfo"]["id"]
    assert manifest["bots"][0]["botId"] == "0f1e2d3c-4b5a-4697-8877-665544332211"


def test_sso_resource_is_the_api_uri_of_the_bot_domain_and_app_id():
    manifest = render_manifest(_settings())
    assert manifest["webApplicationInfo"] == {
        "id": "0f1e2d3c-4b5a-4697-8877-665544332211",
        "resource": "api://crm-copilot.contoso.com/0f1e2d3c-4b5a-4697-8877-665544332211",
    }


def test_valid_domains_hold_the_bot_domain_and_the_bot_framework_token_service():
    assert render_manifest(_settings())["validDomains"] == [
        "crm-copilot.contoso.com",
        "token.botframework.com",
    ]


def test_bot_is_conversational_in_personal_and_team_scopes_without_files():
    manifest = render_manifest(_settings())
    (bot,) = manifest["bots"]
    assert {"personal", "team"} <= set(bot["scopes"])
    assert bot["supportsFiles"] is False
    assert bot["isNotificationOnly"] is False
    assert manifest["permissions"] == ["identity", "messageTeamMembers"]
    assert manifest.get("devicePermissions", []) == []


def test_the_built_packages_manifest_with_its_copilot_agent_validates_against_the_official_schema(
    tmp_path: Path,
):
    """What the admin uploads, not only what the renderer returns: the zip's manifest.json."""
    out = build_package(_settings(), tmp_path / "appPackage.zip")
    with zipfile.ZipFile(out) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    assert manifest["copilotAgents"]["customEngineAgents"][0]["id"] == manifest["bots"][0]["botId"]
    errors = sorted(_schema_validator(_newest_schema_dir()).iter_errors(manifest), key=str)
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


def test_the_bot_is_a_custom_engine_agent_of_microsoft_365_copilot_chat():
    """``copilotAgents.customEngineAgents`` (manifest 1.21 or later) names the bot itself, which
    Copilot Chat requires to have personal scope; the app's short name and description are set."""
    manifest = render_manifest(_settings())
    assert tuple(int(n) for n in manifest["manifestVersion"].split(".")) >= (1, 21)
    (agent,) = manifest["copilotAgents"]["customEngineAgents"]
    (bot,) = manifest["bots"]
    assert agent["type"] == "bot"
    assert agent["id"] == bot["botId"] == _settings().bot_app_id
    assert {"personal", "copilot"} <= set(bot["scopes"])
    assert manifest["name"]["short"]
    assert manifest["description"]["short"]
    assert "approve" in agent["disclaimer"]["text"]
    assert len(agent["disclaimer"]["text"]) <= 500


def test_command_lists_cover_personal_and_team_with_titles_and_descriptions_within_teams_limits():
    (bot,) = render_manifest(_settings())["bots"]
    scopes_covered = set()
    for command_list in bot["commandLists"]:
        scopes_covered |= set(command_list["scopes"])
        assert [c["title"] for c in command_list["commands"]] == EXPECTED_COMMANDS
        for command in command_list["commands"]:
            # Teams' documented limits are tighter than the schema's.
            assert len(command["title"]) <= 32, command
            assert 0 < len(command["description"]) <= 128, command
    assert {"personal", "team"} <= scopes_covered


def test_names_and_descriptions_fit_teams_limits_and_say_what_the_app_does():
    manifest = render_manifest(_settings())
    assert manifest["name"] == {"short": "CRM Copilot", "full": "CRM Sales Copilot"}
    assert len(manifest["description"]["short"]) <= 80
    full = manifest["description"]["full"]
    assert len(full) <= 4000
    for promise in ("live CRM data", "your own CRM permissions", "cites", "never sends", "approve"):
        assert promise in full


def test_accent_colour_is_the_colour_icon_background():
    manifest = render_manifest(_settings())
    assert manifest["accentColor"] == "#{:02X}{:02X}{:02X}".format(*ACCENT_RGB)
    _, _, rows = _read_png((APP_PACKAGE_DIR / "color.png").read_bytes())
    assert tuple(rows[0][:3]) == ACCENT_RGB


# --- settings errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"MicrosoftAppId": "my-bot"}, "MicrosoftAppId must be a GUID"),
        ({"TEAMS_APP_ID": "not-a-guid"}, "TEAMS_APP_ID must be a GUID"),
        ({"BOT_DOMAIN": "https://crm-copilot.contoso.com"}, "BOT_DOMAIN must be a bare host name"),
        ({"BOT_DOMAIN": "crm-copilot.contoso.com/api/messages"}, "BOT_DOMAIN must be a bare host name"),
        ({"BOT_DOMAIN": "localhost:3978"}, "BOT_DOMAIN must be a bare host name"),
        ({"APP_VERSION": "1.0"}, "APP_VERSION must be MAJOR.MINOR.PATCH"),
        ({"APP_VERSION": "1.0.0-beta"}, "APP_VERSION must be MAJOR.MINOR.PATCH"),
        ({"PRIVACY_URL": "http://contoso.com/privacy"}, "PRIVACY_URL must be an absolute https:// URL"),
        ({"PUBLISHER_NAME": "x" * 33}, "PUBLISHER_NAME must be 1-32 characters"),
        ({"PUBLISHER_NAME": "Contoso"}, "PUBLISHER_NAME is a sample value"),
        ({"WEBSITE_URL": "https://www.example.com/crm-copilot"}, "WEBSITE_URL is a sample value"),
        ({"PRIVACY_URL": "https://contoso.com/privacy"}, "PRIVACY_URL is a sample value"),
        ({"TERMS_URL": "https://legal.contoso.example/terms"}, "TERMS_URL is a sample value"),
    ],
)
def test_invalid_settings_fail_with_a_message_naming_the_variable(overrides: dict[str, str], message: str):
    with pytest.raises(ValueError, match=re.escape(message)):
        render_manifest(_settings(**overrides))


def test_a_tenants_package_with_the_sample_publisher_defaults_is_refused_naming_each_setting():
    for env in PUBLISHER_SETTINGS:
        name = _field(env)
        sample = _settings().model_copy(update={name: PackageSettings.model_fields[name].default})
        with pytest.raises(ValueError, match=f"{env} is a sample value"):
            render_manifest(sample)


def test_a_local_package_may_keep_the_sample_publisher():
    assert render_manifest(PackageSettings())["developer"]["name"] == "Contoso"


def _field(env: str) -> str:
    return next(name for name, field in PackageSettings.model_fields.items() if field.alias == env)


def test_settings_come_from_environment_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MicrosoftAppId", "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")
    monkeypatch.setenv("BOT_DOMAIN", "bot.example.net")
    monkeypatch.setenv("APP_VERSION", "3.0.1")
    settings = PackageSettings()
    assert (settings.bot_app_id, settings.bot_domain, settings.app_version) == (
        "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
        "bot.example.net",
        "3.0.1",
    )
    assert settings.manifest_id == settings.bot_app_id


def test_an_unset_or_empty_app_id_is_the_local_app_the_copilot_signs_in_with_locally():
    from copilot.settings import Settings

    local = Settings().obo_client_id
    assert PackageSettings().bot_app_id == local
    # The bot's local development mode sets MicrosoftAppId to nothing.
    assert PackageSettings(MicrosoftAppId="").bot_app_id == local


# --- icons ----------------------------------------------------------------------------------


def test_colour_icon_is_an_opaque_192_pixel_square_with_a_glyph():
    width, height, rows = _read_png((APP_PACKAGE_DIR / "color.png").read_bytes())
    assert (width, height) == (192, 192)
    pixels = _pixels(rows)
    assert all(alpha == 255 for *_, alpha in pixels)
    assert len(set(pixels)) > 2  # not a blank square: background, glyph and smoothed edges


def test_outline_icon_is_32_pixels_of_white_on_transparent_only():
    width, height, rows = _read_png((APP_PACKAGE_DIR / "outline.png").read_bytes())
    assert (width, height) == (32, 32)
    pixels = _pixels(rows)
    # Teams' rule: every visible pixel is pure white; everything else fully transparent.
    assert all(alpha == 0 or (r, g, b) == (255, 255, 255) for r, g, b, alpha in pixels)
    assert any(alpha == 0 for *_, alpha in pixels)
    assert any(alpha == 255 for *_, alpha in pixels)


def test_regenerating_the_icons_reproduces_the_committed_files_byte_for_byte(tmp_path: Path):
    written = write_icons(tmp_path)
    assert sorted(p.name for p in written) == sorted(ICONS)
    for path in written:
        assert path.read_bytes() == (APP_PACKAGE_DIR / path.name).read_bytes(), (
            f"run write_icons(): {path.name}"
        )


def test_png_writer_round_trips_pixels_through_a_standard_decoder():
    rows = [b"".join(bytes((x * 40, y * 60, 7, 255 - x)) for x in range(5)) for y in range(3)]
    rows.append(rows[-1])  # an identical row exercises the "Up" filter
    assert _read_png(png_bytes(5, 4, rows)) == (5, 4, rows)
    with pytest.raises(ValueError, match="RGBA"):
        png_bytes(5, 4, rows[:3])


# --- package --------------------------------------------------------------------------------


def test_package_zip_holds_exactly_the_manifest_and_icons_at_its_root(tmp_path: Path):
    settings = _settings()
    out = build_package(settings, tmp_path / "nested" / "appPackage.zip")
    with zipfile.ZipFile(out) as archive:
        assert sorted(archive.namelist()) == ["color.png", "manifest.json", "outline.png"]
        assert json.loads(archive.read("manifest.json")) == render_manifest(settings)
        assert archive.read("color.png") == (APP_PACKAGE_DIR / "color.png").read_bytes()
        assert archive.read("outline.png") == (APP_PACKAGE_DIR / "outline.png").read_bytes()
        assert archive.read("manifest.json") == manifest_bytes(render_manifest(settings))


def test_building_twice_gives_identical_bytes(tmp_path: Path):
    first = build_package(_settings(), tmp_path / "a.zip").read_bytes()
    second = build_package(_settings(), tmp_path / "b.zip").read_bytes()
    assert first == second


def test_bad_settings_leave_no_package_behind(tmp_path: Path):
    with pytest.raises(ValueError, match="BOT_DOMAIN"):
        build_package(_settings(BOT_DOMAIN="https://x.example"), tmp_path / "app.zip")
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_the_package_and_reports_app_id_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("MicrosoftAppId", "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")
    monkeypatch.setenv("APP_VERSION", "1.2.3")
    for env, value in _settings().model_dump(by_alias=True).items():
        if env in PUBLISHER_SETTINGS:
            monkeypatch.setenv(env, value)
    out = tmp_path / "pkg.zip"
    assert main(["--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert str(out) in printed
    assert "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee" in printed
    assert "1.2.3" in printed
    assert zipfile.is_zipfile(out)


def test_cli_reports_bad_settings_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("BOT_DOMAIN", "https://bot.example.net")
    assert main(["--out", str(tmp_path / "pkg.zip")]) == 2
    assert "BOT_DOMAIN must be a bare host name" in capsys.readouterr().err
    assert not (tmp_path / "pkg.zip").exists()
