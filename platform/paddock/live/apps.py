from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "paddock.live"
    label = "live"

    def ready(self):
        # models are loaded now; the live stream subscribes to the experiments app's events
        from paddock.live.subscribers import connect

        connect()
