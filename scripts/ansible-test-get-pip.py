"""ansible-test's pip bootstrap script, standing in for the one it downloads.

ansible-test creates a venv per sanity test and bootstraps pip in it with a script it fetches from
ci-files.testing.ansible.com, a host this machine cannot reach (it reaches the package index only). It runs that
script as ``<venv python> get_pip.py [pip install arguments] [--no-setuptools] [--no-wheel]``; this one installs pip
from the interpreter's own ensurepip, then runs ``pip install`` with those arguments against the package index
(get-pip's own two options dropped), so every sanity test still gets the exact tool versions ansible-test pins.
"""

import ensurepip
import os
import subprocess
import sys

GET_PIP_OPTIONS = ("--no-setuptools", "--no-wheel")

ensurepip.bootstrap(upgrade=False)
os.environ.pop("PIP_CONFIG_FILE", None)  # ensurepip switches the pip configuration off for itself
asked = [arg for arg in sys.argv[1:] if arg not in GET_PIP_OPTIONS]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *asked]))
