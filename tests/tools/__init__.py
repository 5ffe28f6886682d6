"""Repository tools (they work on the checkout, not on an installed wheel): the documentation
generator (``python -m tests.tools.docgen``, every generated page) and the generator of the
synchronous twins (``python -m tests.tools.unasync``)."""
