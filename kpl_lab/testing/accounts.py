"""OS accounts the tests make: removed with everything they left running."""

from __future__ import annotations

import grp
import pwd
import subprocess
import time


def remove_accounts(prefix: str) -> None:
    """Delete the OS accounts and groups of a test prefix: users', projects', sandboxes', service (`kt1a2b*`)."""
    stem = prefix.rstrip("-")
    for account in pwd.getpwall():
        if account.pw_name.startswith(stem):
            # what a failed test left running as it (a notebook the helper started, say) goes first
            subprocess.run(["pkill", "-KILL", "-u", account.pw_name], capture_output=True, check=False)
            for _ in range(50):
                done = subprocess.run(["userdel", account.pw_name], capture_output=True, check=False)
                if done.returncode != 8:  # 8: the account still has processes, leaving
                    break
                time.sleep(0.1)
    for group in grp.getgrall():
        if group.gr_name.startswith(stem):
            subprocess.run(["groupdel", group.gr_name], capture_output=True, check=False)
