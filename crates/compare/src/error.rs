//! Why one measurement of an experiment could not be made. The experiment names it in its
//! report's "skipped" list and goes on with the others.

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("device configuration: {0}")]
    Config(#[from] flash::ConfigError),
    #[error(transparent)]
    Device(#[from] ftl::FtlError),
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error(transparent)]
    Workload(#[from] workload::WorkloadError),
    #[error(transparent)]
    Campaign(#[from] crashtest::CampaignError),
    /// Transaction clients on a device (`lab::driver::clients`).
    #[error(transparent)]
    Clients(#[from] lab::driver::clients::ClientsError),
    #[error(transparent)]
    TraceTransactions(#[from] lab::driver::clients::TraceTransactionsError),
    #[error(transparent)]
    Sql(#[from] sqlite::SqlError),
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    /// Our SSD under a kernel file system (NBD export, loop device, mkfs, mount).
    #[error(transparent)]
    Kernel(#[from] lab::kernel_stack::KernelStackError),
    /// Making the SSD image a kernel file system runs on.
    #[error(transparent)]
    Ssd(#[from] nvmfs::error::NvmfsError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("design '{0}' is not in this build")]
    NotBuilt(String),
    #[error("the design offers no transactions")]
    NotTransactional,
    /// A step of the measurement failed (named).
    #[error("{step}: {source}")]
    Step {
        step: &'static str,
        source: Box<MeasureError>,
    },
    /// A design did not report a figure the experiment reads (`BlockDevice::metrics`).
    #[error("{design} reports no '{metric}'")]
    MissingMetric {
        design: &'static str,
        metric: String,
    },
    /// The database a run left fails its integrity or consistency check.
    #[error("database check failed: {0}")]
    DatabaseCheck(sqlite::Breach),
    /// The experiment's own precondition does not hold (named in the message).
    #[error("{0}")]
    Precondition(String),
}

pub type Result<T> = std::result::Result<T, MeasureError>;

impl MeasureError {
    /// `e`, as the failure of the named step.
    pub fn step(step: &'static str, e: impl Into<MeasureError>) -> MeasureError {
        MeasureError::Step {
            step,
            source: Box::new(e.into()),
        }
    }
}

/// A figure `dev` reports (`BlockDevice::metrics`), or [`MeasureError::MissingMetric`].
pub fn metric(dev: &dyn ftl::BlockDevice, name: &str) -> Result<f64> {
    lab::device::metric(dev, name).ok_or_else(|| MeasureError::MissingMetric {
        design: dev.design(),
        metric: name.to_string(),
    })
}
