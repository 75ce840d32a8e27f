"""The corpus: third-party operators built on Kopf, run unchanged on PyPI's Kopf and on ours.

Each operator (``operators.py``) is installed twice from the same pinned requirements
(``requirements/<name>.txt``): once with the Kopf of ``kopf.txt`` (the one pin to change to
compare with a newer Kopf), once with our wheel (``environments.py``). Its scenario runs on
both engines against the same control plane, and what a user could see is recorded
(``recording.py``): objects, API writes, log lines, Events, the exit. The differences
(``differing.py``) fail the test unless ``accepted.toml`` lists them with a reason.
"""
