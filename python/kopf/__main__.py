"""``python -m kopf``: the same as the ``kopf`` command."""
from kopf import cli

if __name__ == '__main__':
    cli.command()
