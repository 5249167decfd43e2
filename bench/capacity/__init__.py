"""``python -m bench capacity``: a capacity model from parameters, checked against the bench.

``model.py`` (inputs with units, the arithmetic), ``config.py`` (YAML file, flags, the
deployment's bounds from the settings and ``host.json``), ``calibrate.py`` (assumptions
against a ``bench run --json`` document), ``render.py`` (text and JSON), ``command.py``.
"""
