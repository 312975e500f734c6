"""The command line of the guards: `run --allow-points` (the spend cap, `run/spend_cap.py`)."""

from __future__ import annotations

import argparse


def add_run_guards(run: argparse.ArgumentParser) -> None:
    """The guards' options of `engage-sync run`."""
    run.add_argument("--allow-points", type=int, default=None, metavar="N",
                     help="let this run bill up to N data points, above max_data_points and "
                          "max_data_points_per_day (its points still count toward the day)")
