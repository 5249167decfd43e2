"""The Teams app package an admin uploads in the Teams admin center.

The package is a zip of exactly three files at its root: ``manifest.json`` (rendered from
``appPackage/manifest.template.json`` with this deployment's bot id, domain, version and
publisher details), ``color.png`` (192×192) and ``outline.png`` (32×32, white on
transparent). The icons are drawn here with a stdlib-only PNG writer and committed under
``appPackage/``, so building the package needs nothing but this module and the settings.

``python -m bot package [--out build/appPackage.zip]`` builds it.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import struct
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from copilot.settings import LOCAL_APP_ID

PROJECT_ROOT = Path(__file__).resolve().parent.parent
APP_PACKAGE_DIR = PROJECT_ROOT / "appPackage"
TEMPLATE_PATH = APP_PACKAGE_DIR / "manifest.template.json"
PACKAGE_FILES = ("color.png", "manifest.json", "outline.png")
"""The zip's entries, in the (sorted) order they are written."""

COLOR_ICON_SIZE = 192
OUTLINE_ICON_SIZE = 32
ACCENT_RGB = (0x0F, 0x6C, 0xBD)
"""The colour icon's background; the template's ``accentColor`` is the same colour."""

_GUID = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
# Teams accepts only MAJOR.MINOR.PATCH (its schema's "semver" has no pre-release/build part).
_SEMVER = re.compile(r"^(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)$")
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
_SAMPLE_NAMES = re.compile(
    r"contoso|(^|[./@])example\.(com|net|org)\b|\.(example|invalid|test)\b|localhost", re.IGNORECASE
)
"""Sample organisations and reserved domains (RFC 2606): fine in a local package, never in a tenant's."""
PUBLISHER_SETTINGS = ("PUBLISHER_NAME", "WEBSITE_URL", "PRIVACY_URL", "TERMS_URL")
"""What the Teams admin center shows reps about who publishes the app (infra outputs them)."""


class PackageSettings(BaseSettings):
    """What varies between deployments of the app package (environment variables)."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    bot_app_id: str = Field(default=LOCAL_APP_ID, alias="MicrosoftAppId")
    """The bot's Entra app (client) id; also the SSO app: the bot's and the copilot's one
    ``MicrosoftAppId``. Unset or empty = the local sandbox's (a package for local testing)."""
    bot_domain: str = Field(default="localhost", alias="BOT_DOMAIN")
    """Host name the bot is served from (no scheme, port or path), e.g. ``crm-copilot.contoso.com``."""
    app_version: str = Field(default="1.0.0", alias="APP_VERSION")
    """Teams app version; bump it for every upload, Teams only updates on a higher version."""
    publisher_name: str = Field(default="Contoso", alias="PUBLISHER_NAME")
    website_url: str = Field(default="https://www.example.com/crm-copilot", alias="WEBSITE_URL")
    privacy_url: str = Field(default="https://www.example.com/crm-copilot/privacy", alias="PRIVACY_URL")
    terms_url: str = Field(default="https://www.example.com/crm-copilot/terms", alias="TERMS_URL")
    teams_app_id: str | None = Field(default=None, alias="TEAMS_APP_ID")
    """The Teams app id (manifest ``id``); unset = the bot app id."""

    @field_validator("bot_app_id", mode="before")
    @classmethod
    def _unset_is_local(cls, value: object) -> object:
        return LOCAL_APP_ID if value == "" else value

    @property
    def manifest_id(self) -> str:
        """The Teams app id the manifest declares."""
        return self.teams_app_id or self.bot_app_id


# --- manifest -----------------------------------------------------------------------------


def _check_settings(settings: PackageSettings) -> None:
    """Raise ``ValueError`` naming the environment variable when a value would make a bad package."""
    for env, value in (("MicrosoftAppId", settings.bot_app_id), ("TEAMS_APP_ID", settings.manifest_id)):
        if not _GUID.match(value):
            raise ValueError(f"{env} must be a GUID like 11111111-2222-4333-8444-555555555555; got {value!r}")
    domain = settings.bot_domain
    # validDomains and the SSO resource (api://<domain>/<id>) both want a bare host name.
    if not domain or len(domain) > 253 or not all(_HOST_LABEL.match(label) for label in domain.split(".")):
        raise ValueError(
            f"BOT_DOMAIN must be a bare host name like 'crm-copilot.contoso.com' "
            f"(no scheme such as https://, no port, no path); got {domain!r}"
        )
    if not _SEMVER.match(settings.app_version):
        raise ValueError(
            f"APP_VERSION must be MAJOR.MINOR.PATCH like 1.0.0 (Teams allows no pre-release suffix); "
            f"got {settings.app_version!r}"
        )
    if not 1 <= len(settings.publisher_name) <= 32:
        raise ValueError(f"PUBLISHER_NAME must be 1-32 characters; got {settings.publisher_name!r}")
    for env, url in (
        ("WEBSITE_URL", settings.website_url),
        ("PRIVACY_URL", settings.privacy_url),
        ("TERMS_URL", settings.terms_url),
    ):
        parts = urlsplit(url)
        # Teams requires https for the developer links shown on the app's details page.
        if parts.scheme != "https" or not parts.netloc:
            raise ValueError(f"{env} must be an absolute https:// URL; got {url!r}")
    if settings.bot_app_id != LOCAL_APP_ID:
        # A package for a tenant: reps see these on the app's details page, and the Teams admin
        # center's review needs real links; the sample values are for local packages only.
        values = dict(
            zip(
                PUBLISHER_SETTINGS,
                (settings.publisher_name, settings.website_url, settings.privacy_url, settings.terms_url),
                strict=True,
            )
        )
        for env, value in values.items():
            if _SAMPLE_NAMES.search(value):
                raise ValueError(
                    f"{env} is a sample value ({value!r}): set your organisation's (infra/main.bicep "
                    "publisherName, websiteUrl, privacyUrl, termsUrl; make infra-package passes them)"
                )


def _fill(node: Any, values: dict[str, str]) -> Any:
    """Replace ``{{NAME}}`` in every string of the parsed template (values never need JSON escaping)."""
    if isinstance(node, str):

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                raise ValueError(f"manifest template uses unknown placeholder {{{{{name}}}}}")
            return values[name]

        return _PLACEHOLDER.sub(replace, node)
    if isinstance(node, list):
        return [_fill(item, values) for item in node]
    if isinstance(node, dict):
        return {key: _fill(value, values) for key, value in node.items()}
    return node


def render_manifest(settings: PackageSettings, template: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The Teams manifest for these settings: the template with every placeholder filled.

    Raises ``ValueError`` with the offending environment variable's name if the app id is
    not a GUID, the domain is not a bare host name, the version is not MAJOR.MINOR.PATCH,
    or a developer URL is not https.
    """
    _check_settings(settings)
    values = {
        "BOT_APP_ID": settings.bot_app_id,
        "BOT_DOMAIN": settings.bot_domain,
        "APP_VERSION": settings.app_version,
        "PUBLISHER_NAME": settings.publisher_name,
        "WEBSITE_URL": settings.website_url,
        "PRIVACY_URL": settings.privacy_url,
        "TERMS_URL": settings.terms_url,
        "MANIFEST_ID": settings.manifest_id,
    }
    manifest: dict[str, Any] = _fill(json.loads(template.read_text(encoding="utf-8")), values)
    return manifest


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """``manifest.json`` as written into the package (stable formatting, UTF-8)."""
    return (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# --- PNG ------------------------------------------------------------------------------------

# Fixed-Huffman deflate tables (RFC 1951 §3.2.5). We compress ourselves rather than with
# zlib.compress because zlib builds (zlib vs zlib-ng) emit different bytes for the same
# input, and the committed icons must regenerate byte for byte on any machine.
_LENGTH_BASE = (
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    13,
    15,
    17,
    19,
    23,
    27,
    31,
    35,
    43,
    51,
    59,
    67,
    83,
    99,
    115,
    131,
    163,
    195,
    227,
    258,
)
_LENGTH_EXTRA = (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0)


class _BitWriter:
    """Packs deflate's bit stream: fields LSB-first, Huffman codes MSB-first."""

    def __init__(self) -> None:
        self.out = bytearray()
        self._acc = 0
        self._count = 0

    def bits(self, value: int, count: int) -> None:
        self._acc |= value << self._count
        self._count += count
        while self._count >= 8:
            self.out.append(self._acc & 0xFF)
            self._acc >>= 8
            self._count -= 8

    def code(self, code: int, length: int) -> None:
        reversed_code = 0
        for _ in range(length):
            reversed_code = (reversed_code << 1) | (code & 1)
            code >>= 1
        self.bits(reversed_code, length)

    def symbol(self, value: int) -> None:
        """A literal/length symbol (0-287) with its fixed Huffman code."""
        if value < 144:
            self.code(0x30 + value, 8)
        elif value < 256:
            self.code(0x190 + value - 144, 9)
        elif value < 280:
            self.code(value - 256, 7)
        else:
            self.code(0xC0 + value - 280, 8)

    def flush(self) -> bytes:
        if self._count:
            self.out.append(self._acc & 0xFF)
            self._acc = self._count = 0
        return bytes(self.out)


def _zlib_deterministic(data: bytes) -> bytes:
    """A zlib stream of ``data``: one fixed-Huffman block, runs of a repeated byte as matches.

    PNG-filtered icon rows are mostly runs of zeros, so run-length matching at distance 1
    already compresses them well.
    """
    writer = _BitWriter()
    writer.bits(1, 1)  # BFINAL
    writer.bits(1, 2)  # BTYPE = fixed Huffman
    i, n = 0, len(data)
    while i < n:
        run = 0
        if i:
            while run < 258 and i + run < n and data[i + run] == data[i - 1]:
                run += 1
        if run >= 3:
            index = bisect.bisect_right(_LENGTH_BASE, run) - 1
            writer.symbol(257 + index)
            writer.bits(run - _LENGTH_BASE[index], _LENGTH_EXTRA[index])
            writer.code(0, 5)  # distance code 0 = distance 1, no extra bits
            i += run
        else:
            writer.symbol(data[i])
            i += 1
    writer.symbol(256)  # end of block
    return b"\x78\x01" + writer.flush() + struct.pack(">I", zlib.adler32(data))


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_bytes(width: int, height: int, rgba_rows: Sequence[bytes]) -> bytes:
    """An 8-bit RGBA PNG of ``height`` rows of ``width * 4`` bytes each; same input, same bytes."""
    stride = width * 4
    if len(rgba_rows) != height or any(len(row) != stride for row in rgba_rows):
        raise ValueError(f"expected {height} rows of {stride} bytes (RGBA)")
    filtered = bytearray()
    previous = bytes(stride)
    for row in rgba_rows:
        if row == previous:
            # Filter "Up": a row equal to the one above becomes all zeros.
            filtered.append(2)
            filtered.extend(bytes(stride))
        else:
            # Filter "Sub": flat colour runs become zeros after the first pixel.
            filtered.append(1)
            filtered.extend(row[:4])
            filtered.extend((row[x] - row[x - 4]) & 0xFF for x in range(4, stride))
        previous = bytes(row)
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", _zlib_deterministic(bytes(filtered)))
        + _chunk(b"IEND", b"")
    )


def write_png(path: Path, width: int, height: int, rgba_rows: Sequence[bytes]) -> Path:
    """Write an 8-bit RGBA PNG (see :func:`png_bytes`) to ``path``."""
    path.write_bytes(png_bytes(width, height, rgba_rows))
    return path


# --- icons ----------------------------------------------------------------------------------

# The glyph (three rising bars and a trend arrow: "your pipeline") in a unit square, y down.
_BARS = ((0.00, 0.62, 0.20, 1.00), (0.40, 0.48, 0.60, 1.00), (0.80, 0.34, 1.00, 1.00))
_ARROW_FROM = (0.02, 0.46)
_ARROW_TO = (0.74, 0.10)
_ARROW_HALF_WIDTH = 0.045
_ARROW_HEAD = 0.22


def _in_glyph(x: float, y: float) -> bool:
    if any(x0 <= x <= x1 and y0 <= y <= y1 for x0, y0, x1, y1 in _BARS):
        return True
    (ax, ay), (bx, by) = _ARROW_FROM, _ARROW_TO
    dx, dy = bx - ax, by - ay
    length = (dx * dx + dy * dy) ** 0.5
    ux, uy = dx / length, dy / length
    # Position along the arrow (t) and across it (s), in glyph units.
    t = (x - ax) * ux + (y - ay) * uy
    s = -(x - ax) * uy + (y - ay) * ux
    shaft_end = length - _ARROW_HEAD * 0.6
    if 0 <= t <= shaft_end and abs(s) <= _ARROW_HALF_WIDTH:
        return True
    # Arrow head: a triangle whose base sits at the shaft's end, tip beyond _ARROW_TO.
    head = t - shaft_end
    return 0 <= head <= _ARROW_HEAD and abs(s) <= (_ARROW_HEAD - head) * 0.55


def _coverage(size: int, margin: float, samples: int = 4) -> list[list[float]]:
    """Fraction of each pixel inside the glyph (supersampled, so edges are smooth)."""
    scale = 1.0 - 2 * margin
    grid: list[list[float]] = []
    for py in range(size):
        row = []
        for px in range(size):
            hits = 0
            for sy in range(samples):
                gy = ((py + (sy + 0.5) / samples) / size - margin) / scale
                for sx in range(samples):
                    gx = ((px + (sx + 0.5) / samples) / size - margin) / scale
                    hits += _in_glyph(gx, gy)
            row.append(hits / (samples * samples))
        grid.append(row)
    return grid


def color_icon_rows() -> list[bytes]:
    """192×192 opaque pixels: a white glyph on the accent colour, filling the square (Teams' colour icon)."""
    rows = []
    for coverage_row in _coverage(COLOR_ICON_SIZE, margin=0.22):
        row = bytearray()
        for c in coverage_row:
            row.extend(round(channel + (255 - channel) * c) for channel in ACCENT_RGB)
            row.append(255)
        rows.append(bytes(row))
    return rows


def outline_icon_rows() -> list[bytes]:
    """32×32 pixels: the glyph in white, everything else fully transparent (Teams' outline rule)."""
    # Transparent pixels are white too (alpha 0), so scaling never blends in a dark fringe.
    return [
        b"".join(bytes((255, 255, 255, round(255 * c))) for c in coverage_row)
        for coverage_row in _coverage(OUTLINE_ICON_SIZE, margin=0.06)
    ]


ICONS: dict[str, tuple[int, Callable[[], list[bytes]]]] = {
    "color.png": (COLOR_ICON_SIZE, color_icon_rows),
    "outline.png": (OUTLINE_ICON_SIZE, outline_icon_rows),
}


def write_icons(directory: Path = APP_PACKAGE_DIR) -> list[Path]:
    """(Re)draw ``color.png`` and ``outline.png`` into ``directory``; the output never varies."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_png(directory / name, size, size, draw()) for name, (size, draw) in ICONS.items()]


# --- package --------------------------------------------------------------------------------


def build_package(settings: PackageSettings, out_path: Path, icons_dir: Path = APP_PACKAGE_DIR) -> Path:
    """Write the app package zip (``manifest.json``, ``color.png``, ``outline.png`` at its root).

    The zip is deterministic: same settings and icons, same bytes (fixed timestamps, sorted
    entries, stored rather than deflated so no zlib build can change it).
    """
    contents = {
        "manifest.json": manifest_bytes(render_manifest(settings)),
        "color.png": (icons_dir / "color.png").read_bytes(),
        "outline.png": (icons_dir / "outline.png").read_bytes(),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so an interrupted build never leaves half a zip.
    fd, tmp_name = tempfile.mkstemp(prefix=out_path.name, suffix=".tmp", dir=out_path.parent)
    try:
        with os.fdopen(fd, "wb") as handle, zipfile.ZipFile(handle, "w") as archive:
            for name in sorted(contents):
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_STORED
                info.create_system = 3  # Unix, so the permission bits below mean something
                info.external_attr = 0o100644 << 16
                archive.writestr(info, contents[name])
        os.replace(tmp_name, out_path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return out_path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bot package``: build the Teams app package; 0 on success, 2 on bad settings."""
    parser = argparse.ArgumentParser(
        prog="python -m bot package",
        description="Build the Teams app package (zip) to upload in the Teams admin center. "
        "Settings come from MicrosoftAppId, BOT_DOMAIN, APP_VERSION, PUBLISHER_NAME, WEBSITE_URL, "
        "PRIVACY_URL, TERMS_URL and TEAMS_APP_ID.",
    )
    parser.add_argument("--out", type=Path, default=Path("build/appPackage.zip"), help="zip to write")
    parser.add_argument(
        "--write-icons",
        action="store_true",
        help=f"first redraw color.png and outline.png into {APP_PACKAGE_DIR}",
    )
    args = parser.parse_args(argv)
    try:
        settings = PackageSettings()
        if args.write_icons:
            for path in write_icons():
                print(f"Drew {path}")
        out = build_package(settings, args.out)
    except ValueError as exc:  # includes pydantic's ValidationError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Wrote {out}")
    print(
        f"  Teams app id {settings.manifest_id}, bot id {settings.bot_app_id}, version {settings.app_version}"
    )
    print("  Upload it in the Teams admin center: Teams apps > Manage apps > Upload new app.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
