"""``agentrt feedback RUN_ID --right | --wrong | --reward X``: a user's verdict on a run, recorded as its reward.

The verdict is appended beside the trajectories of the home (agentrt.trajectory.feedback); ``agentrt learn
--traffic`` learns from the runs that have one. RUN_ID: the ``trajectory_id`` of ``agentrt run --json``,
the SDK's ``Result.trajectory_id``, or the server's response id (``chatcmpl-...``).
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("feedback", help="record whether a run's answer was right (its reward, for learn --traffic)")
    p.add_argument("run_id", help="the run's trajectory id (run --json), or the server's response id")
    verdict = p.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--right", action="store_true", help="the answer was right (reward 1)")
    verdict.add_argument("--wrong", action="store_true", help="the answer was wrong (reward 0)")
    verdict.add_argument("--reward", type=float, help="a reward in [0, 1] (partial credit)")
    p.add_argument("--note", default="", help="why (kept with the verdict)")
    p.add_argument("--json", action="store_true", help="print the recorded verdict as JSON")
    p.set_defaults(func=cmd_feedback)


def cmd_feedback(args: argparse.Namespace) -> int:
    from agentrt.core.config import load_settings
    from agentrt.trajectory.feedback import record_feedback

    settings = load_settings(args.config)
    correct = True if args.right else False if args.wrong else None
    entry = record_feedback(settings.trajectory_dir, args.run_id, reward=args.reward, correct=correct,
                            source="cli", note=args.note)
    if args.json:
        print(json.dumps(entry))
    else:
        print(f"recorded: run {entry['run_id']} reward {entry['score']:g}"
              + ("" if entry["correct"] is None else f" ({'right' if entry['correct'] else 'wrong'})"))
    return 0
