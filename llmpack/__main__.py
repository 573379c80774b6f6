import sys

from llmpack.cli import main

sys.exit(main())
