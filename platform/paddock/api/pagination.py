from rest_framework.pagination import CursorPagination


class NewestFirst(CursorPagination):
    """Opaque cursors over ids, newest first: stable while rows are added meanwhile."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200
