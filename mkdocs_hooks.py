"""mkdocs hooks for the rhea documentation site (registered under ``hooks:`` in mkdocs.yml).

rhea's docstrings are plain text with reStructuredText-style literals, not Markdown: an
expression such as ``policies=["vanilla", "rhea"]`` or ``x[i][j]`` reads to Markdown as a
reference link, and mkdocs-autorefs then warns that no page defines that target. Those
warnings say nothing about the documentation, so they are downgraded to info for text that
comes from a docstring under ``rhea/`` or ``rhea_kernels/``. An unresolved cross-reference
written in a page under ``docs/`` still warns, and so fails ``mkdocs build --strict``.
"""
from __future__ import annotations

import logging
import re

_AUTOREFS_LOGGER = "mkdocs.plugins.mkdocs_autorefs._internal.plugin"
_FROM_DOCSTRING = re.compile(r"from \S*[/\\](rhea|rhea_kernels)[/\\]\S+\.py:\d+: .*Could not find cross-reference target")


class _DocstringRefsToInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and _FROM_DOCSTRING.search(record.getMessage()):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def on_startup(command, dirty):  # noqa: ARG001 (mkdocs hook signature)
    logger = logging.getLogger(_AUTOREFS_LOGGER)
    if not any(isinstance(f, _DocstringRefsToInfo) for f in logger.filters):
        logger.addFilter(_DocstringRefsToInfo())
