"""What the Python checks of the test suite need from PyPI, and how they say it is missing.

missing_numpy_safetensors() imports numpy and safetensors.numpy; when one is missing it prints
why and returns the exit code the check must end with: 77 (CTest's skip) on a developer's
machine, 1 under CI=true, where a skip would hide a check that never ran. None when both import.
"""
import os


def missing_numpy_safetensors():
    try:
        import numpy  # noqa: F401
        import safetensors.numpy  # noqa: F401
    except ImportError as e:
        message = f"missing Python package ({e.name}); install with: pip install safetensors numpy"
        if os.environ.get("CI") == "true":
            print(f"FAIL: {message} (required under CI=true)")
            return 1
        print(f"SKIP: {message}")
        return 77
    return None
