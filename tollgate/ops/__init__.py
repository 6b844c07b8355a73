"""The operations function: the admin and support use cases, run inside the VPC for a caller whose IAM
identity Lambda verified (a function URL with AWS_IAM auth)."""
