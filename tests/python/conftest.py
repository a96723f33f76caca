"""pytest setup for the CPU suite: tests/ on sys.path, so that the independent reference
(tests/torch_reference.py) imports as `torch_reference`."""
import os
import sys

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
