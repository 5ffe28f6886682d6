"""Repository tools (they work on the checkout, not on an installed wheel): the documentation
generators (``python -m tests.tools.docgen``, ``python -m tests.tools.cli_docgen``) and the
generator of the synchronous twins (``python -m tests.tools.unasync``)."""
