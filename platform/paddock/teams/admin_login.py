"""The admin's login form under the same limit as the session login (http/limits.py):
a second door onto staff accounts must not be the one without a lock. Checked before the
password is tried, counted per client address and per username, and the two doors share
the counts (a guesser cannot split the attempts between them)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from paddock.http.client_address import request_client_address
from paddock.http.limits import login_blocked, login_failure_record


def admin_login(request: HttpRequest, extra_context=None) -> HttpResponse:
    if request.method != "POST":
        return admin.site.login(request, extra_context)
    ip = request_client_address(request)
    username = request.POST.get("username", "")
    wait = login_blocked(ip=ip, username=username)
    if wait:
        reply = HttpResponse(
            f"Too many failed logins; try again in {wait} s.\n",
            status=429,
            content_type="text/plain; charset=utf-8",
        )
        reply["Retry-After"] = str(wait)
        return reply
    response = admin.site.login(request, extra_context)
    # success redirects; a refused password shows the form again (200)
    if response.status_code == 200:
        login_failure_record(ip=ip, username=username)
    return response
