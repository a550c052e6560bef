#!/bin/sh
# The measures of issue 32's four costs and issue 31's compressed request
# bodies, as the tests that pin them log them: run from the repository
# root, on the code before (main at 8c02d0e, with these test files copied
# in) and after. Wall-clock figures are ratios measured in the same test
# (the filter) or the contract's own wall time (the retries).
set -x
go test -count=1 -v -run 'TestUsageFilterLinear' ./usage
go test -count=1 -v -run 'TestReadAhead|TestFailedReconcile|TestCompressedRequest|TestUndecodableRequest' .
go test -count=1 -v -run 'TestFailedReconcilesDroppedOnTime' ./upstream
