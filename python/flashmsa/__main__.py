"""`python -m flashmsa bench ...` (see flashmsa/cli.py)."""
import sys

from .cli import main

sys.exit(main())
