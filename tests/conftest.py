import pytest

import shapewatch


@pytest.fixture(autouse=True)
def _clean_records():
    shapewatch.reset()
    yield
    shapewatch.reset()
