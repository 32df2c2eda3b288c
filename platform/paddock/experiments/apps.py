from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "paddock.experiments"
    label = "experiments"

    def ready(self) -> None:
        # a pre-flight run that ended without a verdict settles its experiment
        from paddock.experiments import hooks, preflight

        hooks.subscribe(hooks.Event.RUN_STATE_CHANGED, preflight.run_state_changed)
