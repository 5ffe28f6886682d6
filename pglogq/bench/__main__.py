from pglogq.bench.cli import command

command(prog_name="python -m pglogq.bench")
