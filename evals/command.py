"""``python -m evals [--model M] [--dataset D] [--json] [--langsmith] [--limit N]
[--report PATH]`` and ``python -m evals --generate [--check]``.

Progress goes to stderr; one table per model and the brief items' table (or with ``--json``
the JSON report) to stdout; the JSON report is also written to ``--report``. Exit code 1 when
any model, or the brief items, has a metric outside the thresholds stored with the dataset
(``<dataset>.thresholds.json``). ``--limit`` slices the answer items; the brief items (no model,
well under a second each) always run, once.

The CRM profile is ``CRM_KIND`` (``make eval CRM_KIND=dataverse``): on ``dataverse`` the copilot
reads the sandbox's Dataverse face, a dataset name means that profile's file
(``heldout.dataverse.jsonl``, its thresholds beside it) and ``--generate`` builds and checks those.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from copilot.errors import InvalidInput
from copilot.settings import PROJECT_ROOT, CrmKind, Settings
from evals.briefs import BriefReport, evaluate_briefs
from evals.dataset import dataset_path, load_dataset, load_thresholds
from evals.langsmith import langsmith_step
from evals.report import brief_table, document, to_table
from evals.run import ModelReport, evaluate_model, slice_items
from evals.scripted import is_scripted, scripted_model

DEFAULT_DATASET = "heldout"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _generate(*, check: bool, as_json: bool, profile: CrmKind = "reference") -> int:
    """Rebuild the ``profile``'s datasets; with ``check``, into a scratch directory and compare
    with the stored ones instead (exit 1 when they differ: the seed or the generator changed)."""
    from evals.generate import generate as build

    if not check:
        written = asyncio.run(build(_progress, profile=profile))
        if as_json:
            print(json.dumps({"written": {split: str(path) for split, path in written.items()}}))
        return 0
    with tempfile.TemporaryDirectory(prefix="copilot-eval-check-") as scratch:
        fresh = asyncio.run(build(_progress, Path(scratch), profile))
        stale = [
            dataset_path(split, profile).stem
            for split, path in fresh.items()
            if not dataset_path(split, profile).is_file()
            or dataset_path(split, profile).read_text(encoding="utf-8") != path.read_text(encoding="utf-8")
        ]
    if as_json:
        print(json.dumps({"current": not stale, "stale": stale}))
    elif stale:
        print(f"datasets out of date: {', '.join(stale)} (run: python -m evals --generate)")
    else:
        print("datasets are what the generator builds from the sandbox seed")
    return 1 if stale else 0


def models_to_run(settings: Settings, model: str | None) -> list[str]:
    """``--model`` alone, else ``COPILOT_MODEL`` and each ``COPILOT_FALLBACK_MODELS`` entry.

    ``--model scripted:lazy`` is one of the eval's own scripted models (:mod:`evals.scripted`)."""
    if model is not None:
        name = model.strip()
        if name.lower() != "offline" and ":" not in name:
            raise InvalidInput(f"--model must be 'offline' or 'provider:model', got {model!r}")
        if is_scripted(name):
            scripted_model(name)  # an unknown scripted model is bad input before anything starts
        return [name]
    names = [settings.copilot_model, *settings.fallback_model_names()]
    return list(dict.fromkeys(names))


def main(
    settings: Settings,
    *,
    model: str | None,
    dataset: str | None,
    as_json: bool,
    langsmith: bool,
    limit: int | None,
    report_path: str | None,
    generate: bool,
    check: bool = False,
) -> int:
    """Run the command; returns the exit code."""
    profile = settings.crm_kind
    if check and not generate:
        raise InvalidInput("--check goes with --generate")
    if generate:
        return _generate(check=check, as_json=as_json, profile=profile)
    if limit is not None and limit < 1:
        raise InvalidInput("--limit must be at least 1")
    name = dataset or DEFAULT_DATASET
    path = dataset_path(name, profile)
    loaded = load_dataset(path)
    items = slice_items(loaded.items, limit)
    thresholds = load_thresholds(path)
    models = models_to_run(settings, model)
    briefs: BriefReport | None = None
    if loaded.briefs or not thresholds.briefs.empty:
        _progress(f"eval: {len(loaded.briefs)} brief items of {path.name} (no model, CRM profile {profile})")
        briefs = asyncio.run(evaluate_briefs(loaded.briefs, thresholds.briefs, _progress, profile))
    reports: list[ModelReport] = []
    for each in models if items else []:
        _progress(f"eval: {len(items)} items of {path.name} with model {each} on CRM profile {profile}")
        reports.append(asyncio.run(evaluate_model(each, items, thresholds, _progress, profile)))
    doc = document(reports, thresholds, path.stem, briefs, profile)
    out = Path(report_path) if report_path else PROJECT_ROOT / ".data" / "eval" / f"{path.stem}-report.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str), encoding="utf-8")
    if as_json:
        print(json.dumps(doc, default=str))
    else:
        for report in reports:
            print(to_table(report, thresholds, path.stem, profile))
            print()
        if briefs is not None:
            print(brief_table(briefs, thresholds.briefs, path.stem, profile))
            print()
        print(f"report: {out}")
    if langsmith:
        for line in langsmith_step(settings, path.stem, items, doc):
            _progress(line)
    return 0 if doc["passed"] else 1
