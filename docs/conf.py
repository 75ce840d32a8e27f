"""Sphinx's configuration of the documentation site (built by checks/run with warnings as
errors; hosted by Read the Docs, .readthedocs.yaml). Pages are Markdown (MyST); the reference
pages are made from the code: the API from its docstrings (autodoc), the CLI from its click
commands (sphinx-click), the settings, metrics, keyword arguments and accepted differences by
the directives of ``_ext/kopf_docs.py``."""

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / '_ext'))

project = 'kopf-rs'
author = 'the kopf-rs authors'
copyright = '2026, the kopf-rs authors'

extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx_click',
    'kopf_docs',
]
source_suffix = {'.md': 'markdown', '.rst': 'restructuredtext'}
exclude_patterns = ['_build', 'requirements.txt']
myst_enable_extensions = ['colon_fence', 'deflist']
myst_heading_anchors = 3

html_theme = 'furo'  # as Kopf's own documentation: its users find their way around
html_title = 'kopf-rs'
html_static_path = ['_static']
html_favicon = '_static/favicon.svg'

autodoc_member_order = 'bysource'
autodoc_typehints = 'description'
autodoc_default_options = {'members': True, 'show-inheritance': True}
# Every reference must resolve: a broken cross-reference is a warning, and warnings fail the build.
# Text as typed: `--lease` stays two hyphens (copied commands must work), quotes stay straight.
smartquotes = False
nitpicky = False
suppress_warnings: list[str] = []
