"""``python -m bot serve [--port 3978]`` and ``python -m bot package``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run one bot command; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m bot", description="The Teams bot")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the bot dev server (aiohttp) on embedded defaults")
    serve.add_argument("--port", type=int, default=3978)
    commands.add_parser(
        "package", help="build the Teams app package (zip) for the admin center", add_help=False
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "serve":
        from bot.server import serve as run

        run(args.port)
        return 0
    from bot.package import main as package

    return package(rest)


if __name__ == "__main__":
    sys.exit(main())
