"""The application state of the admin API and the dashboard, as ``web.AppKey``s (set up by `create_app`'s
cleanup context; the client protocol's keys are beside `create_app` in ``app.py``)."""

from __future__ import annotations

from aiohttp import web

from shepherd.admin import AdminService
from shepherd.http.signins import SignInTable

#: the admin operations over the served store and graph
ADMIN = web.AppKey("admin", AdminService)
#: the dashboard's sign-ins (cookie id -> token hash and CSRF token)
SIGNINS = web.AppKey("signins", SignInTable)
#: the admin token created at this start ("" if the store had one): shown once by the command line
CREATED_ADMIN_TOKEN = web.AppKey("created_admin_token", str)
#: this run's local admin credential, published in the data folder for the admin commands
LOCAL_CREDENTIAL = web.AppKey("local_credential", str)
#: the dashboard's files (name -> bytes), read once when the app is created
DASHBOARD_FILES = web.AppKey("dashboard_files", dict)
