from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "paddock.sweeps"
    label = "sweeps"

    def ready(self):
        # models are loaded now; a sweep advances when one of its members' runs changes state
        from paddock.sweeps.subscribers import connect

        connect()
