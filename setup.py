"""Only what pyproject.toml cannot say: install the shipped pocket models (kept in the repository's top-level
data/pocket) inside the package as judgekit/pocket/shipped, so that `pip install .` works from anywhere.
`judgekit.pocket.find_pocket_dir` prefers that copy and falls back to data/pocket in a checkout."""

from setuptools import find_packages, setup

POCKET_DATA = ["*.json", "*.md", "target/*", "draft/*", "hard-target/*", "hard-draft/*"]

setup(
    packages=find_packages(include=["judgekit", "judgekit.*"]) + ["judgekit.pocket.shipped"],
    package_dir={"judgekit.pocket.shipped": "data/pocket"},
    package_data={"judgekit": ["py.typed", "configs/*.toml"], "judgekit.pocket.shipped": POCKET_DATA},
    include_package_data=False,
)
