"""Factories of the platform tests."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from paddock.clusters.models import RayCluster
from paddock.teams.models import Membership, Role, Team, TeamQuota


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")
    quota = factory.RelatedFactory("tests.platform.factories.QuotaFactory", "team")


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamQuota

    team = factory.SubFactory(TeamFactory)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    team = factory.SubFactory(TeamFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RayCluster

    name = factory.Sequence(lambda n: f"cluster-{n}")
    address = "http://127.0.0.1:8265"
    backends = ["torch", "vllm"]
