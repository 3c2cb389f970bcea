"""`python -m study ...`"""
import sys

from study.cli import main

sys.exit(main())
