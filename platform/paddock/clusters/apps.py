from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "paddock.clusters"
    label = "clusters"
