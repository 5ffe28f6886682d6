from tests.harness.bench.cli import command

command(prog_name="python -m tests.harness.bench")
