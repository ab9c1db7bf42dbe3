"""Trajectories: the versioned record schema, the append-only store, rewards and exports.

``schema`` (typed steps and records) and ``store`` (append-only JSONL) are re-exported here;
``rewards`` and ``export`` are imported by name (they pull optional extras).
"""

from agentrt.trajectory.schema import (
    SCHEMA_VERSION,
    STEP_TYPES,
    SUPPORTED_VERSIONS,
    TRAJECTORY_FILE,
    MemoryOpStep,
    ModelCallStep,
    PlanResultStep,
    PlanStep,
    RewardBreakdown,
    RouteStep,
    RunTask,
    ScoreStep,
    EscalationStep,
    FinalAnswerStep,
    SampleSelectionStep,
    Step,
    parse_step,
    SearcherFailedStep,
    TaskInfo,
    ToolCallStep,
    TrajectoryRecord,
    attach_task,
    new_run_id,
    now,
    tool_call_step,
)
from agentrt.trajectory.store import (
    Quarantined,
    ReadReport,
    TrajectoryWriter,
    find_record,
    iter_records,
    read_trajectories,
    rebuild_index,
    trajectory_files,
)

__all__ = [
    "SCHEMA_VERSION", "SUPPORTED_VERSIONS", "TRAJECTORY_FILE", "ModelCallStep", "ToolCallStep", "RouteStep",
    "PlanStep", "SearcherFailedStep", "PlanResultStep", "MemoryOpStep", "ScoreStep", "EscalationStep", "SampleSelectionStep", "FinalAnswerStep", "Step", "parse_step", "STEP_TYPES", "RewardBreakdown",
    "TaskInfo", "TrajectoryRecord",
    "tool_call_step", "new_run_id", "now", "RunTask", "attach_task", "ReadReport", "TrajectoryWriter", "read_trajectories",
    "iter_records", "find_record", "Quarantined", "rebuild_index", "trajectory_files",
]
