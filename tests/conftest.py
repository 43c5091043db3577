"""Shared fixtures. Each real server a test needs is started by a fixture module below."""

pytest_plugins = [
    "tests.fixtures.tiers",
    "tests.fixtures.schedule",
    "tests.fixtures.postgres",
    "tests.fixtures.docker",
    "tests.fixtures.server",
    "tests.fixtures.nodes",
    "tests.fixtures.s3",
    "tests.fixtures.slurm",
    "tests.fixtures.browser",
    "tests.fixtures.recording_telemetry",
    "tests.fixtures.ray",
    "tests.fixtures.recipe_artifacts",
]
