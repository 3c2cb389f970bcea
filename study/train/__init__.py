"""The training stage: a loop over a typed state, the runtime it runs on, evaluation,
learning-rate schedules, data streams and checkpoints. It imports the kernel (`study.core`)
and nothing above it."""
