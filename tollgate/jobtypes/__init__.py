"""Job types: each kind of work Tollgate runs, as one bundle (``base.JobType``) listed in ``registry``."""
