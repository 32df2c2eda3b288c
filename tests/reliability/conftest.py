"""The platform fixtures (two teams, a launched experiment) for the fault tests."""

from tests.platform.conftest import client_as, launched, world  # noqa: F401
