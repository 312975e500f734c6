"""engage_sandbox: a local, independent HTTP stand-in for the customer-engagement service.

Written from ``shared/spec/service-interface.md`` and ``service-facts.md`` only; it never
imports ``engage_sync``. Entry points: :func:`engage_sandbox.web.app.create_app`,
:func:`engage_sandbox.web.server.run_sandbox` and the ``engage-sandbox`` console script.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
