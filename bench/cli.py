"""``python -m bench``: the bench's command line (tooling, never shipped with the product).

* ``python -m bench run --rep HANDLE [--json] [--quick]``: what a turn and an approve click
  cost, as ratios against bare LangChain (:mod:`bench.run`).
* ``python -m bench capacity [--config FILE.yaml] [--<input> VALUE ...] [--calibrate BENCH_JSON]
  [--json]``: the capacity model from parameters (:mod:`bench.capacity`).

Errors follow ``python -m copilot``'s convention (:func:`copilot.cli.guarded`, shared with
``python -m evals``): one ``error:`` line, exit 2 for bad input and 1 for a failure, never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from copilot.cli import guarded
from copilot.settings import CrmKind, Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="the copilot's bench (tooling)")
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser(
        "run",
        help="measure turn and approval costs as ratios against bare LangChain, on the CRM profile "
        "CRM_KIND names (reference or dataverse; the CRM is a sandbox it starts; see README)",
    )
    bench.add_argument("--rep", required=True, help="the sandbox rep's handle the bench signs in as")
    bench.add_argument("--json", action="store_true", help="a JSON document instead of the table")
    bench.add_argument("--quick", action="store_true", help="a few iterations (CI smoke test)")
    capacity = commands.add_parser(
        "capacity", help="model calls, tokens, cost, CRM limits, checkpoints and hosting from parameters"
    )
    capacity.add_argument("--config", help="a YAML file of inputs (flags override it)")
    capacity.add_argument(
        "--calibrate", metavar="BENCH_JSON", help="compare the assumptions with a `bench run --json` document"
    )
    capacity.add_argument("--json", action="store_true", help="a JSON document instead of the text")
    from bench.capacity.config import add_arguments as capacity_arguments

    capacity_arguments(capacity)
    return parser


def _bench_profile() -> CrmKind:
    """The bench's CRM is a sandbox it starts: ``CRM_KIND`` picks the profile it measures and
    the sandbox gives the rest, so ``CRM_URL`` is neither asked for nor used."""
    from bench.environment import crm_profile

    kind = crm_profile()
    Settings(CRM_KIND="reference")  # the rest of the configuration must still be valid
    return kind


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code."""
    args = _parser().parse_args(argv)

    def run(kind: CrmKind) -> int:
        from bench.run import main as bench

        return bench(rep=args.rep, quick=args.quick, as_json=args.json, crm_kind=kind)

    def capacity(settings: Settings) -> int:
        from bench.capacity.command import main as capacity_main
        from bench.capacity.model import CapacityInputs

        return capacity_main(
            settings,
            config_file=args.config,
            overrides={name: getattr(args, name) for name in CapacityInputs.model_fields},
            calibrate_file=args.calibrate,
            as_json=args.json,
        )

    if args.command == "run":
        return guarded(_bench_profile, run)
    return guarded(Settings, capacity)
