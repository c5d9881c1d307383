"""Sphinx configuration for the tornado_readinto documentation.

Build with ``tox -e docs`` (warnings are errors), or directly::

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import sys

# Document the package in this checkout, installed or not.
sys.path.insert(0, os.path.abspath(".."))

import tornado_readinto  # noqa: E402

project = "tornado_readinto"
author = "tornado_readinto contributors"
copyright = "tornado_readinto contributors"
version = release = tornado_readinto.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]

# Docstrings follow Tornado's style: `Name` is a cross-reference to any Python
# object, ``text`` is literal.  References to Tornado, asyncio or distributed
# objects have no target here (no intersphinx: the build uses no network) and
# render as plain code; nitpicky stays off for that reason.
default_role = "py:obj"

autodoc_member_order = "bysource"
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
}
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False

# _generated/ holds the tables that python -m benchmarks.publish renders;
# pages include them.
exclude_patterns = ["_build", "_generated"]
html_theme = "sphinx_rtd_theme"
html_theme_options = {
    "navigation_depth": 3,
}
html_title = f"tornado_readinto {release}"
html_show_sourcelink = False
