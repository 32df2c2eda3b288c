"""/api/v1/session/: the browser app's login, logout, current user and CSRF cookie."""

from django.urls import path

from . import session_views

urlpatterns = [
    path("login", session_views.session_login, name="session-login"),
    path("logout", session_views.session_logout, name="session-logout"),
    path("me", session_views.session_me, name="session-me"),
    path("csrf", session_views.session_csrf, name="session-csrf"),
]
