"""Sphinx configuration of the API reference (`make docs`, into build/docs/).

The front page is the README; SPEC, DESIGN, RELIABILITY, CHECKER, PROTOCOLS and the other
documents stand beside it as they are (myst-parser reads their Markdown, links between
them become links between pages); api.md documents every public name from its docstring
(autodoc, with napoleon for Google/NumPy sections).  Built with -W: a warning fails the
build (tests/test_docs.py).
"""
import bus1py

project = "bus1py"
author = "The bus1py developers"
release = version = bus1py.__version__
copyright = "bus1py developers, MIT license"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 4           # README and SPEC link to sections by their GitHub anchors
myst_enable_extensions = ["colon_fence"]
# the study's generated tables (docs/study/) open with no title and are pages that
# PROTOCOLS links to, not chapters of the reference's table of contents
# PROTOCOLS links to, not chapters of the reference's table of contents; a heading level
# skipped inside a document is its author's choice of weight
suppress_warnings = ["toc.not_included", "myst.header"]

napoleon_use_ivar = True           # "Attributes:" as fields: a NamedTuple's own fields stay autodoc's
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True   # defaults as written: mode=0o600, not 384
autodoc_default_options = {"members": True, "show-inheritance": False}
autoclass_content = "both"          # a class's docstring and its __init__'s

html_theme = "furo"
html_title = f"bus1py {release}"
