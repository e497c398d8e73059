"""What the experiments' tests share: refusal(), an experiment's usage error."""

import contextlib
import io


def refusal(test, run, argv, allow_torch=False):
    """run.main(argv)'s usage error (run: the experiment's module): asserts exit status 2
    and returns its stderr. Nothing may be trained first (run.train_one fails the test if
    it is called), nor, unless allow_torch, torch imported (run._import_torch fails it)."""
    def called(what):
        def fail(*_):
            raise AssertionError("%s before the arguments were refused" % what)
        return fail
    saved = run._import_torch, run.train_one
    if not allow_torch:
        run._import_torch = called("torch imported")
    run.train_one = called("a model trained")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), test.assertRaises(SystemExit) as e:
            run.main(argv)
    finally:
        run._import_torch, run.train_one = saved
    test.assertEqual(e.exception.code, 2, err.getvalue())
    return err.getvalue()
