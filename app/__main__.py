import sys

if getattr(sys, "frozen", False):  # the packaged app: `serve --workers N` spawns copies of it
    import multiprocessing

    multiprocessing.freeze_support()

from app.cli import main

sys.exit(main())
