"""The store on SQLite and Postgres: the contract both keep, migrations, indexes, the kept counts,
retention, key rotation and secrets at rest.
"""
