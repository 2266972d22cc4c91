"""Administration: users, agents, API keys, the admin token and the special actions, as one service that
the admin API (``shepherd/http/admin.py``), the dashboard and the command line all use.

Dependencies: ``http -> admin -> graph``; the command line uses ``admin`` too, on the store directly when
no server holds the data folder, and through the running server's admin API (`RemoteOperations`) when
one does.
"""

from shepherd.admin.errors import Forbidden, Invalid, Unavailable
from shepherd.admin.records import (ADMIN, ActionResult, AgentView, CreatedKey, KeyView, NewAgent, Principal,
                                    UserView)
from shepherd.admin.names import check_name, match_agent
from shepherd.admin.actions import EXPORT_FORMATS
from shepherd.admin.operations import Operations
from shepherd.admin.service import AdminService

__all__ = ["ADMIN", "EXPORT_FORMATS", "ActionResult", "AdminService", "AgentView", "CreatedKey", "Forbidden", "Invalid",
           "KeyView", "NewAgent", "Operations", "Principal", "Unavailable", "UserView", "check_name", "match_agent"]
