"""The package surface: a small public API, ``import mrope`` without torch or triton, one error class."""

import os
import subprocess
import sys

import mrope


def test_public_names():
    assert sorted(mrope.__all__) == [
        "MRopeError",
        "MRotaryEmbedding",
        "PositionTable",
        "from_config",
        "get_rope_index",
        "supported_model_types",
    ]
    for name in mrope.__all__:
        assert getattr(mrope, name) is not None, name


def test_error_is_a_value_error():
    assert issubclass(mrope.MRopeError, ValueError)


def test_import_needs_only_numpy():
    code = (
        "import sys, mrope; "
        "heavy = sorted(m for m in ('torch', 'triton', 'transformers') if m in sys.modules); "
        "assert not heavy, heavy"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_unknown_attribute_is_an_attribute_error():
    try:
        mrope.not_a_name  # noqa: B018
    except AttributeError as err:
        assert "not_a_name" in str(err)
    else:
        raise AssertionError("mrope.not_a_name did not raise")
