"""Build scripts for the Lambda artifacts; the stacks read the staged function code's stamp from here."""
