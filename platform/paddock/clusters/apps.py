from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "paddock.clusters"
    label = "clusters"

    def ready(self):
        # models are loaded now; dispatch subscribes to the experiments app's events
        from paddock.clusters.subscribers import connect

        connect()
