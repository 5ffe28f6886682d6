"""The tests' fixtures, as pytest plugins registered by ``pytest_plugins`` in tests/conftest.py."""
