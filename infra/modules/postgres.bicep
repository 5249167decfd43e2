// Azure Database for PostgreSQL Flexible Server. Entra authentication is on, with an Entra
// group (or user) as the server's Entra administrator: that is who runs
// `python -m copilot db migrate`. The Function App's managed identity is mapped to the
// unprivileged copilot_app role after the first migration (the SQL is this module's output,
// see docs/ADMIN.md); it is never an administrator. Password authentication is off unless
// passwordAuth is set (then the admin password is a secure parameter and the app's
// DATABASE_URL lives in Key Vault). pgvector is allow-listed (azure.extensions).
// checkov has no rules for Microsoft.DBforPostgreSQL/flexibleServers: tests/infra checks it.

param name string
param location string
param tags object
param databaseName string
param entraAdminObjectId string
param entraAdminName string
@allowed([
  'Group'
  'User'
  'ServicePrincipal'
])
param entraAdminType string = 'Group'
param appIdentityName string
param passwordAuth bool = false
@secure()
param administratorPassword string = ''
param allowPublicAccess bool = false
@description('Log Analytics workspace the resource\'s diagnostic logs and metrics go to.')
param workspaceId string
param adminIpAddress string = ''
@description('Compute: main.bicep picks it with the pool size in view.')
param skuName string
@allowed([
  'Burstable'
  'GeneralPurpose'
  'MemoryOptimized'
])
param skuTier string
param storageSizeGB int = 32
param backupRetentionDays int = 7

var reachable = allowPublicAccess || (!empty(adminIpAddress))

resource server 'Microsoft.DBforPostgreSQL/flexibleServers@2024-08-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: skuName
    tier: skuTier
  }
  properties: {
    version: '16'
    administratorLogin: passwordAuth ? 'copilotadmin' : null
    administratorLoginPassword: passwordAuth ? administratorPassword : null
    authConfig: {
      activeDirectoryAuth: 'Enabled'
      passwordAuth: passwordAuth ? 'Enabled' : 'Disabled'
      tenantId: tenant().tenantId
    }
    storage: {
      storageSizeGB: storageSizeGB
      autoGrow: 'Enabled'
    }
    backup: {
      backupRetentionDays: backupRetentionDays
      geoRedundantBackup: 'Disabled'
    }
    highAvailability: {
      mode: 'Disabled'
    }
    network: {
      publicNetworkAccess: reachable ? 'Enabled' : 'Disabled'
    }
  }
}

resource entraAdmin 'Microsoft.DBforPostgreSQL/flexibleServers/administrators@2024-08-01' = {
  parent: server
  name: entraAdminObjectId
  properties: {
    principalName: entraAdminName
    principalType: entraAdminType
    tenantId: tenant().tenantId
  }
}

// The server takes one change at a time: its children (administrator, configurations, database,
// firewall rules) run in one dependsOn chain, or ARM sends them in parallel and the server answers
// ServerIsBusy, on redeploys too. A condition-false rule drops out of the chain (ARM removes a
// dependency on a resource it does not deploy). main.bicep's private endpoint follows the module.

// pgvector (knowledge search) must be allow-listed before CREATE EXTENSION vector.
resource extensions 'Microsoft.DBforPostgreSQL/flexibleServers/configurations@2024-08-01' = {
  parent: server
  name: 'azure.extensions'
  properties: {
    value: 'VECTOR'
    source: 'user-override'
  }
  dependsOn: [
    entraAdmin
  ]
}

resource tls 'Microsoft.DBforPostgreSQL/flexibleServers/configurations@2024-08-01' = {
  parent: server
  name: 'require_secure_transport'
  properties: {
    value: 'ON'
    source: 'user-override'
  }
  dependsOn: [
    extensions
  ]
}

resource database 'Microsoft.DBforPostgreSQL/flexibleServers/databases@2024-08-01' = {
  parent: server
  name: databaseName
  properties: {
    charset: 'UTF8'
    collation: 'en_US.utf8'
  }
  dependsOn: [
    tls
  ]
}

resource adminMachine 'Microsoft.DBforPostgreSQL/flexibleServers/firewallRules@2024-08-01' = if (!empty(adminIpAddress)) {
  parent: server
  name: 'admin-machine'
  properties: {
    startIpAddress: adminIpAddress
    endIpAddress: adminIpAddress
  }
  dependsOn: [
    database
  ]
}

// Without a VNet the Function App reaches the server over Azure's public addresses: the
// special 0.0.0.0 rule admits Azure services only, and only when explicitly asked for.
resource azureServices 'Microsoft.DBforPostgreSQL/flexibleServers/firewallRules@2024-08-01' = if (allowPublicAccess) {
  parent: server
  name: 'AllowAllAzureServicesAndResourcesWithinAzureIps'
  properties: {
    startIpAddress: '0.0.0.0'
    endIpAddress: '0.0.0.0'
  }
  dependsOn: [
    database
    adminMachine
  ]
}

// Audit and diagnostic logs, and metrics, to Log Analytics (alerts in alerts.bicep query them).
resource serverDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: server
  properties: {
    workspaceId: workspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

output id string = server.id
output name string = server.name
output host string = server.properties.fullyQualifiedDomainName
output databaseName string = database.name
output appRoleGrantSql string = 'SELECT * FROM pgaadauth_create_principal(\'${appIdentityName}\', false, false); GRANT copilot_app TO "${appIdentityName}";'
