//! The filter trait and the ordered chain that runs the filters of one route class.

use crate::{FilterContext, Rejection, RequestView};

/// One edge filter. `filter` runs once per request, in chain order, before any handler.
///
/// Returning `Err` stops the chain: the request is answered with the rejection and no later
/// filter or handler runs. Filters are synchronous (everything they consult is in memory).
pub trait RequestFilter: Send + Sync {
    /// A stable name, used in logs and by the test that pins the chain order.
    fn name(&self) -> &'static str;

    fn filter(&self, req: &RequestView<'_>, ctx: &mut FilterContext) -> Result<(), Rejection>;

    /// Runs instead of [`RequestFilter::filter`] when an earlier filter refused the request, in
    /// chain order, and returns the rejection to answer with.
    ///
    /// It exists for filters that must see every request even though they run late: rate
    /// limiting counts refused requests too ("all requests count") and every response carries
    /// its `X-RateLimit-*` headers, and a caller that is over its limit gets a 429 rather than
    /// the earlier 401/403 (so guessing keys is throttled). The default keeps the rejection.
    fn on_rejected(&self, req: &RequestView<'_>, ctx: &mut FilterContext, rejection: Rejection) -> Rejection {
        let _ = (req, ctx);
        rejection
    }
}

/// An ordered list of filters, built once at start from configuration.
#[derive(Default)]
pub struct FilterChain {
    filters: Vec<Box<dyn RequestFilter>>,
}

impl FilterChain {
    pub fn new() -> Self {
        FilterChain { filters: Vec::new() }
    }

    pub fn with(mut self, filter: impl RequestFilter + 'static) -> Self {
        self.filters.push(Box::new(filter));
        self
    }

    /// The filter names in the order they run.
    pub fn names(&self) -> Vec<&'static str> {
        self.filters.iter().map(|f| f.name()).collect()
    }

    /// Runs the filters in order. After a refusal, the remaining filters see the request only
    /// through [`RequestFilter::on_rejected`]; the filter whose refusal is answered is left in
    /// [`FilterContext::rejected_by`].
    pub fn run(&self, req: &RequestView<'_>, ctx: &mut FilterContext) -> Result<(), Rejection> {
        for (i, f) in self.filters.iter().enumerate() {
            if let Err(mut rejection) = f.filter(req, ctx) {
                let mut by = f.name();
                for later in &self.filters[i + 1..] {
                    let code = rejection.code;
                    rejection = later.on_rejected(req, ctx, rejection);
                    if rejection.code != code {
                        by = later.name();
                    }
                }
                ctx.rejected_by = Some(by);
                return Err(rejection);
            }
        }
        Ok(())
    }
}
