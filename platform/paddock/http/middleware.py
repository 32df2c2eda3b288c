"""The request policy (policy.py) at the door of Django's middleware chain: in place of
Django's SecurityMiddleware and XFrameOptionsMiddleware, whose rules policy.py holds now
so that the doors around Django apply the same ones (checks.py keeps this door in the
chain)."""

from __future__ import annotations

from django.core.exceptions import DisallowedHost
from django.utils.deprecation import MiddlewareMixin

from .policy import bad_host, https_refusal, security_headers


class FrontDoorMiddleware(MiddlewareMixin):
    """Its hooks run in the request's lane, as the whole sync chain does (lanes.py)."""

    def process_request(self, request):
        try:
            host = request.get_host()
        except DisallowedHost:
            return bad_host().response()
        refused = https_refusal(
            secure=request.is_secure(), method=request.method, path=request.path, host=host,
            full_path=request.get_full_path(),
        )  # fmt: skip
        return None if refused is None else refused.response()

    def process_response(self, request, response):
        headers = security_headers(
            path=request.path, content_type=response.get("Content-Type", ""),
            secure=request.is_secure(),
        )  # fmt: skip
        exempt = getattr(response, "xframe_options_exempt", False)
        for name, value in headers:
            if not (exempt and name == "X-Frame-Options"):
                response.headers.setdefault(name, value)
        return response
