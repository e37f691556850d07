"""The khelper command; its entry point is kpl_helper.cli.main:main, as in kpl-helper 0.1.3."""
