"""Adds perfsight-autostart.pth to the wheel's root, so PERFSIGHT_OPTIONS alone profiles an
unmodified script once it imports torch (the .pth line does nothing unless that variable is set)."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "perfsight-autostart.pth"
PTH_LINE = ("import os; os.environ.get('PERFSIGHT_OPTIONS') and "
            "__import__('perfsight.launch.torch_import', fromlist=['_']).when_torch_imported("
            "__import__('perfsight.collect.autostart', fromlist=['_']).activate_from_env)\n")


class BuildWithAutostart(build_py):
    def run(self):
        super().run()
        Path(self.build_lib, PTH_NAME).write_text(PTH_LINE, encoding="utf-8")

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, PTH_NAME))]


setup(cmdclass={"build_py": BuildWithAutostart})
