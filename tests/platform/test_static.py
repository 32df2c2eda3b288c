"""Hashed assets of the browser app (Vite names them `name-<8 chars>.js`) are cached for
good; anything else revalidates, so a new build is seen at once."""

from django.http import HttpResponse
from django.test import RequestFactory
from whitenoise.middleware import WhiteNoiseMiddleware


def test_a_hashed_asset_gets_a_far_future_cache_control(settings, tmp_path):
    (tmp_path / "RunPage-6zbXX4zg.js").write_text("export {}")
    (tmp_path / "config.js").write_text("export {}")
    settings.STATICFILES_DIRS = [tmp_path]
    middleware = WhiteNoiseMiddleware(lambda request: HttpResponse(status=404))
    hashed = middleware(RequestFactory().get("/static/RunPage-6zbXX4zg.js"))
    plain = middleware(RequestFactory().get("/static/config.js"))
    assert hashed.status_code == plain.status_code == 200
    assert "immutable" in hashed["Cache-Control"]
    assert int(hashed["Cache-Control"].split("max-age=")[1].split(",")[0]) >= 365 * 24 * 3600
    assert "immutable" not in plain["Cache-Control"]
