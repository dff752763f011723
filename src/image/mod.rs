//! Docker Engine side: build context, build, tag, push, registry auth.
